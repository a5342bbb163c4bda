#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Checks the cluster manifests in deploy/ (python3-yaml).

deploy/rbac.yaml: exactly a ServiceAccount, a ClusterRole and a ClusterRoleBinding; the
role grants exactly nodes get/list/watch and pods list/watch in the core group (what
kgpu-clusterd's list-then-watch of its Node and of the pods on its node needs), nothing
else, no wildcard; the binding names that role and that ServiceAccount (name and
namespace).

deploy/nfd-node-feature-rule.yaml: one NodeFeatureRule (nfd.k8s-sigs.io/v1alpha1) whose
extended resources are exactly gpu.intel.com/millicores, memory.max and tiles, each
"@local.label.<label>" of a label kgpu-probed writes with a numeric value, the rule
matching on those same labels with Exists. The label names and their value formats are
read from the probe's label code (daemons/probe/labels-intel.[ch]), not copied here.

usage: check-deploy.py SOURCE_ROOT
"""

import os
import re
import sys

import yaml

EXPECTED_RULES = {('', 'nodes'): {'get', 'list', 'watch'}, ('', 'pods'): {'list', 'watch'}}
EXTENDED = {'gpu.intel.com/millicores', 'gpu.intel.com/memory.max', 'gpu.intel.com/tiles'}


def fail(msg):
    print('FAIL: ' + msg)
    sys.exit(1)


def load(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    if not docs:
        fail('%s: no YAML document' % path)
    return docs


def check_rbac(path):
    docs = load(path)
    kinds = sorted(d.get('kind') for d in docs)
    if kinds != ['ClusterRole', 'ClusterRoleBinding', 'ServiceAccount']:
        fail('%s: kinds %r' % (path, kinds))
    by_kind = {d['kind']: d for d in docs}
    sa, role, binding = by_kind['ServiceAccount'], by_kind['ClusterRole'], by_kind['ClusterRoleBinding']
    if sa.get('apiVersion') != 'v1' or not sa['metadata'].get('namespace'):
        fail('%s: ServiceAccount %r' % (path, sa))
    for d in (role, binding):
        if d.get('apiVersion') != 'rbac.authorization.k8s.io/v1':
            fail('%s: %s apiVersion %r' % (path, d['kind'], d.get('apiVersion')))
    got = {}
    for rule in role.get('rules', []):
        if set(rule) - {'apiGroups', 'resources', 'verbs'}:
            fail('%s: rule with %r' % (path, sorted(rule)))
        for g in rule['apiGroups']:
            for r in rule['resources']:
                got.setdefault((g, r), set()).update(rule['verbs'])
    if got != EXPECTED_RULES:
        fail('%s: ClusterRole grants %r, expected exactly %r' % (path, got, EXPECTED_RULES))
    ref = binding.get('roleRef', {})
    if ref != {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'ClusterRole', 'name': role['metadata']['name']}:
        fail('%s: roleRef %r' % (path, ref))
    subjects = binding.get('subjects', [])
    want = [{'kind': 'ServiceAccount', 'name': sa['metadata']['name'], 'namespace': sa['metadata']['namespace']}]
    if subjects != want:
        fail('%s: subjects %r, expected %r' % (path, subjects, want))


def probe_labels(root):
    """{label name: printf format} of the Intel labels the probe sets with a format."""
    with open(os.path.join(root, 'daemons', 'probe', 'labels-intel.h')) as f:
        m = re.search(r'#define\s+LABELS_INTEL_PREFIX\s+"([^"]+)"', f.read())
    if not m:
        fail('LABELS_INTEL_PREFIX not found in labels-intel.h')
    prefix = m.group(1)
    with open(os.path.join(root, 'daemons', 'probe', 'labels-intel.c')) as f:
        code = f.read()
    out = {}
    for name, fmt, macro in re.findall(
            r'label_table_setf\(\s*&?\w+\s*,\s*LABELS_INTEL_PREFIX\s+"([^"]+)"\s*,\s*"([^"]*)"\s*(PRI\w+)?', code):
        out[prefix + name] = fmt + macro  # "%" PRIu64 -> "%PRIu64"
    if not out:
        fail('no label_table_setf(..., LABELS_INTEL_PREFIX "...", "...") in labels-intel.c')
    return out


def check_rule(path, labels):
    docs = load(path)
    if len(docs) != 1 or docs[0].get('kind') != 'NodeFeatureRule' or \
            docs[0].get('apiVersion') != 'nfd.k8s-sigs.io/v1alpha1':
        fail('%s: expected one nfd.k8s-sigs.io/v1alpha1 NodeFeatureRule, got %r' % (
            path, [(d.get('apiVersion'), d.get('kind')) for d in docs]))
    rules = docs[0]['spec']['rules']
    ext = {}
    for rule in rules:
        ext.update(rule.get('extendedResources') or {})
        exprs = {}
        for mf in rule.get('matchFeatures', []):
            if mf.get('feature') == 'local.label':
                exprs.update(mf.get('matchExpressions', {}))
        refs = set()
        for res, value in (rule.get('extendedResources') or {}).items():
            m = re.fullmatch(r'@local\.label\.(.+)', str(value))
            if not m:
                fail('%s: %s = %r is not "@local.label.<label>"' % (path, res, value))
            label = m.group(1)
            if label not in labels:
                fail('%s: %s reads label %s, which kgpu-probed does not write (it writes %s)' % (
                    path, res, label, ', '.join(sorted(labels))))
            if labels[label] not in ('%zu', '%u', '%PRIu64', '%PRIu32'):
                fail('%s: label %s is written with format %r, not a number' % (path, label, labels[label]))
            if res != label:
                fail('%s: resource %s from label %s (the Intel rule uses the label name)' % (path, res, label))
            refs.add(label)
        if {k: v for k, v in exprs.items() if k in refs} != {k: {'op': 'Exists'} for k in refs}:
            fail('%s: rule %r matches %r, expected Exists on %r' % (path, rule.get('name'), exprs, sorted(refs)))
    if set(ext) != EXTENDED:
        fail('%s: extended resources %r, expected %r' % (path, sorted(ext), sorted(EXTENDED)))


def main():
    root = sys.argv[1]
    check_rbac(os.path.join(root, 'deploy', 'rbac.yaml'))
    check_rule(os.path.join(root, 'deploy', 'nfd-node-feature-rule.yaml'), probe_labels(root))
    print('deploy/: rbac.yaml and nfd-node-feature-rule.yaml OK')


if __name__ == '__main__':
    main()
