#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apisim_pki.py — the test PKI and kubeconfig files for the API server simulator
# (apiserver_sim.py re-exports both functions; import them from either module).
#
# make_pki(directory, users=DEFAULT_USERS, tokens=DEFAULT_TOKENS) -> dict of paths
#   Creates, with the openssl command-line tool, in `directory` (created 0700):
#     ca.crt, ca.key              the cluster CA (EC P-256, CA:TRUE, keyCertSign)
#     server.crt, server.key      the API server's certificate, signed by the CA,
#                                 serverAuth, SANs IP:127.0.0.1, IP:::1, DNS:localhost,
#                                 DNS:kubernetes, DNS:kubernetes.default.svc
#     <user>.crt, <user>.key      one client certificate per user (clientAuth), subject
#                                 CN=<user name>, one O=<group> per group: the way
#                                 kube-apiserver's x509 authenticator reads a client
#                                 certificate (CN = user name, O = groups)
#     rogue-ca.crt, rogue.crt, rogue.key
#                                 a second CA and a client certificate it signed (CN of
#                                 the first user): a certificate the server must reject
#     expired.crt, expired.key    a client certificate of the first user, signed by the CA,
#                                 already expired (notAfter one day before notBefore)
#     tokens.csv                  the bearer-token table in kube-apiserver's
#                                 --token-auth-file format: token,user,uid,"g1,g2"
#     <user>.token                each token alone in a file (a kubeconfig tokenFile)
#   Returns {'dir', 'ca', 'ca_key', 'server_cert', 'server_key', 'tokens',
#            'users': {name: {'cert', 'key', 'groups'}}, 'token_files': {user: path},
#            'token_values': {user: token}, 'rogue_ca', 'rogue_cert', 'rogue_key',
#            'expired_cert', 'expired_key'}.
#   An existing complete directory (ca.crt and tokens.csv present) is reused as it is.
#   `users` is a list of (name, [groups]); `tokens` a list of (token, name, [groups]).
#
# make_client_cert(pki, name, user, groups=(), days=825) -> (cert, key)
#   Another client certificate signed by the CA, files <name>.crt/.key in the PKI
#   directory (certificate rotation tests; days=-1 makes it already expired).
#
# write_serviceaccount(directory, pki, token=None, namespace='kube-system') -> directory
#   The files a pod's service account gets (token, ca.crt, namespace), as the kubelet
#   mounts them at /var/run/secrets/kubernetes.io/serviceaccount; token defaults to the
#   service account's entry of the token table (SERVICEACCOUNT_USER).
#
# write_kubeconfig(path, server, ca=None, client_cert=None, client_key=None,
#                  token=None, token_file=None, embed=True, name='kgpu-test',
#                  user='kgpu-cluster', insecure=False) -> path
#   Writes a kubeconfig (apiVersion v1, kind Config) with one cluster, one user and one
#   context, in kubectl's key order. embed=True: certificate-authority-data,
#   client-certificate-data, client-key-data (base64 of the files); embed=False: the
#   path keys certificate-authority, client-certificate, client-key. token → `token:`,
#   token_file → `tokenFile:`. The file is made 0600.

import base64
import csv
import os
import secrets
import subprocess

DEFAULT_USERS = [
    ('kgpu-cluster', ['kgpu:cluster-daemons']),
    ('intruder', ['intruders']),
]
SERVICEACCOUNT_USER = 'system:serviceaccount:kube-system:kgpu-clusterd'   # deploy/rbac.yaml
DEFAULT_TOKENS = [
    ('kgpu-cluster-token-0123456789abcdef', 'kgpu-cluster', ['kgpu:cluster-daemons']),
    ('intruder-token-0123456789abcdef', 'intruder', ['intruders']),
    ('kgpu-sa-token-0123456789abcdef', SERVICEACCOUNT_USER,
     ['system:serviceaccounts', 'system:serviceaccounts:kube-system']),
]

_OPENSSL_TIMEOUT = 30


def _openssl(*args, cwd):
    r = subprocess.run(['openssl'] + list(args), cwd=cwd, capture_output=True,
                       text=True, timeout=_OPENSSL_TIMEOUT)
    if r.returncode != 0:
        raise RuntimeError('openssl %s failed: %s' % (' '.join(args), r.stderr.strip()))


def _key(name, d):
    _openssl('genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256',
             '-out', name, cwd=d)
    os.chmod(os.path.join(d, name), 0o600)


def _ca(prefix, cn, d):
    _key(prefix + '.key', d)
    _openssl('req', '-x509', '-new', '-key', prefix + '.key', '-subj', '/CN=' + cn,
             '-days', '3650', '-sha256', '-out', prefix + '.crt',
             '-addext', 'basicConstraints=critical,CA:TRUE',
             '-addext', 'keyUsage=critical,keyCertSign,cRLSign,digitalSignature', cwd=d)


def _subj_escape(s):
    return s.replace('\\', '\\\\').replace('/', '\\/').replace('=', '\\=').replace('+', '\\+')


def _leaf(prefix, subject, ext_lines, ca_prefix, d, days='825'):
    _key(prefix + '.key', d)
    _openssl('req', '-new', '-key', prefix + '.key', '-subj', subject,
             '-out', prefix + '.csr', cwd=d)
    ext = prefix + '.ext'
    with open(os.path.join(d, ext), 'w') as f:
        f.write('\n'.join(ext_lines) + '\n')
    _openssl('x509', '-req', '-in', prefix + '.csr', '-CA', ca_prefix + '.crt',
             '-CAkey', ca_prefix + '.key', '-set_serial', '0x' + secrets.token_hex(16),
             '-days', days, '-sha256', '-extfile', ext, '-out', prefix + '.crt', cwd=d)
    os.unlink(os.path.join(d, prefix + '.csr'))
    os.unlink(os.path.join(d, ext))


def _client_ext():
    return ['basicConstraints=critical,CA:FALSE',
            'keyUsage=critical,digitalSignature,keyEncipherment',
            'extendedKeyUsage=clientAuth']


def _client_subject(user, groups):
    return ''.join('/O=' + _subj_escape(g) for g in groups) + '/CN=' + _subj_escape(user)


def _result(d, users, tokens):
    r = {
        'dir': d,
        'ca': os.path.join(d, 'ca.crt'),
        'ca_key': os.path.join(d, 'ca.key'),
        'server_cert': os.path.join(d, 'server.crt'),
        'server_key': os.path.join(d, 'server.key'),
        'tokens': os.path.join(d, 'tokens.csv'),
        'rogue_ca': os.path.join(d, 'rogue-ca.crt'),
        'rogue_cert': os.path.join(d, 'rogue.crt'),
        'rogue_key': os.path.join(d, 'rogue.key'),
        'expired_cert': os.path.join(d, 'expired.crt'),
        'expired_key': os.path.join(d, 'expired.key'),
        'users': {},
        'token_files': {},
        'token_values': {},
    }
    for name, groups in users:
        r['users'][name] = {'cert': os.path.join(d, name + '.crt'),
                            'key': os.path.join(d, name + '.key'),
                            'groups': list(groups)}
    for token, name, _groups in tokens:
        r['token_files'][name] = os.path.join(d, name.replace(':', '_') + '.token')
        r['token_values'][name] = token
    return r


def read_token_file(path):
    """Parses a --token-auth-file CSV: {token: (user, uid, [groups])}."""
    table = {}
    with open(path, newline='') as f:
        for row in csv.reader(f):
            if len(row) < 3 or row[0].startswith('#'):
                continue
            groups = [g for g in row[3].split(',') if g] if len(row) > 3 else []
            table[row[0]] = (row[1], row[2], groups)
    return table


def make_pki(directory, users=None, tokens=None):
    users = DEFAULT_USERS if users is None else users
    tokens = DEFAULT_TOKENS if tokens is None else tokens
    d = os.path.abspath(directory)
    os.makedirs(d, mode=0o700, exist_ok=True)
    if os.path.exists(os.path.join(d, 'tokens.csv')):       # written last: the set is complete
        return _result(d, users, tokens)
    for name, _groups in users:
        if '/' in name or name.startswith('.') or not name:
            raise ValueError('bad user name for a file: %r' % name)
    _ca('ca', 'kgpu-test-ca', d)
    _leaf('server', '/CN=kube-apiserver',
          ['basicConstraints=critical,CA:FALSE',
           'keyUsage=critical,digitalSignature,keyEncipherment',
           'extendedKeyUsage=serverAuth',
           'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost,DNS:kubernetes,'
           'DNS:kubernetes.default.svc'], 'ca', d)
    for name, groups in users:
        _leaf(name, _client_subject(name, groups), _client_ext(), 'ca', d)
    _ca('rogue-ca', 'rogue-ca', d)
    first = users[0] if users else ('rogue', [])
    _leaf('rogue', _client_subject(first[0], first[1]), _client_ext(), 'rogue-ca', d)
    _leaf('expired', _client_subject(first[0], first[1]), _client_ext(), 'ca', d, days='-1')
    with open(os.path.join(d, 'tokens.csv'), 'w', newline='') as f:
        w = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        for i, (token, name, groups) in enumerate(tokens):
            w.writerow([token, name, 'uid-%d' % i, ','.join(groups)])
    for token, name, _groups in tokens:
        p = os.path.join(d, name.replace(':', '_') + '.token')
        with open(p, 'w') as f:
            f.write(token + '\n')
        os.chmod(p, 0o600)
    return _result(d, users, tokens)


def make_client_cert(pki, name, user, groups=(), days=825):
    d = pki['dir']
    if '/' in name or name.startswith('.') or not name:
        raise ValueError('bad certificate name %r' % name)
    _leaf(name, _client_subject(user, list(groups)), _client_ext(), 'ca', d, days=str(days))
    return os.path.join(d, name + '.crt'), os.path.join(d, name + '.key')


def write_serviceaccount(directory, pki, token=None, namespace='kube-system'):
    os.makedirs(directory, mode=0o755, exist_ok=True)
    if token is None:
        token = pki['token_values'][SERVICEACCOUNT_USER]
    with open(pki['ca'], 'rb') as f:
        ca = f.read()
    for name, data in (('token', token.encode()), ('ca.crt', ca), ('namespace', namespace.encode())):
        p = os.path.join(directory, name)
        with open(p + '.tmp', 'wb') as f:
            f.write(data)
        os.chmod(p + '.tmp', 0o644)
        os.replace(p + '.tmp', p)
    return directory


def _b64(path):
    with open(path, 'rb') as f:
        return base64.b64encode(f.read()).decode()


def _q(s):
    # A YAML double-quoted scalar (JSON string syntax is valid YAML).
    import json
    return json.dumps(str(s))


def write_kubeconfig(path, server, ca=None, client_cert=None, client_key=None,
                     token=None, token_file=None, embed=True, name='kgpu-test',
                     user='kgpu-cluster', insecure=False):
    lines = ['apiVersion: v1', 'clusters:', '- cluster:']
    if ca:
        if embed:
            lines.append('    certificate-authority-data: ' + _b64(ca))
        else:
            lines.append('    certificate-authority: ' + _q(ca))
    if insecure:
        lines.append('    insecure-skip-tls-verify: true')
    lines += ['    server: ' + _q(server),
              '  name: ' + _q(name),
              'contexts:',
              '- context:',
              '    cluster: ' + _q(name),
              '    user: ' + _q(user),
              '  name: ' + _q(name),
              'current-context: ' + _q(name),
              'kind: Config',
              'preferences: {}',
              'users:',
              '- name: ' + _q(user),
              '  user:']
    body = []
    if client_cert:
        body.append(('    client-certificate-data: ' + _b64(client_cert)) if embed
                    else ('    client-certificate: ' + _q(client_cert)))
    if client_key:
        body.append(('    client-key-data: ' + _b64(client_key)) if embed
                    else ('    client-key: ' + _q(client_key)))
    if token:
        body.append('    token: ' + _q(token))
    if token_file:
        body.append('    tokenFile: ' + _q(token_file))
    if not body:
        lines[-1] = '  user: {}'
    lines += body
    tmp = path + '.tmp'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    os.replace(tmp, path)
    return path
