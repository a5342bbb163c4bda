#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Shows that check-introspection.py fails when daemon and contract drift apart: a fake
# daemon prints the contract with one signature changed, one member dropped.
set -eu
checker=$1
contract=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The unchanged contract must pass.
printf '#!/bin/sh\ncat "%s"\n' "$contract" >"$tmp/same"
chmod +x "$tmp/same"
/usr/bin/python3 "$checker" "$contract" "$tmp/same" >/dev/null
# A changed signature must fail.
sed 's/type="aas" direction="in"/type="as" direction="in"/' "$contract" >"$tmp/changed.xml"
cmp -s "$contract" "$tmp/changed.xml" && { echo "selftest: sed changed nothing"; exit 1; }
printf '#!/bin/sh\ncat "%s"\n' "$tmp/changed.xml" >"$tmp/drift"
chmod +x "$tmp/drift"
if /usr/bin/python3 "$checker" "$contract" "$tmp/drift"; then
        echo "selftest: a changed signature was not detected"
        exit 1
fi
# A missing method must fail.
/usr/bin/python3 - "$contract" "$tmp/missing.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
tree = ET.parse(sys.argv[1])
for iface in tree.getroot().iter('interface'):
    for m in iface.findall('method'):
        if m.get('name') == 'PreStartContainer':
            iface.remove(m)
tree.write(sys.argv[2])
PY
grep -q PreStartContainer "$tmp/missing.xml" && { echo "selftest: method not removed"; exit 1; }
printf '#!/bin/sh\ncat "%s"\n' "$tmp/missing.xml" >"$tmp/missing"
chmod +x "$tmp/missing"
if /usr/bin/python3 "$checker" "$contract" "$tmp/missing" 2>/dev/null; then
        echo "selftest: a missing method was not detected"
        exit 1
fi
echo "selftest: drift detected as expected"
