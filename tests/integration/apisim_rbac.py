#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apisim_rbac.py — the API server simulator's authorization table, and its reading from
# RBAC manifests (python3-yaml), so a test can enforce the repository's own ClusterRole.
#
# A table is a list of rules {'users': [...], 'groups': [...], 'verbs': [...],
# 'resources': [...], optional 'resourceNames': [...], optional 'namespaces': [...]};
# a request is allowed when one rule names its user or one of its groups, its verb, its
# resource, (with resourceNames) its name, and (with namespaces) its namespace.
# rbac_from_manifests(texts_or_paths) turns ClusterRole/Role + ClusterRoleBinding/
# RoleBinding documents into such rules: subjects User, Group, ServiceAccount
# (system:serviceaccount:<ns>:<name>); only rules of the core group ("") count; a
# RoleBinding limits its rules to its namespace. Facts ("Using RBAC Authorization"):
# verbs and resources are matched literally, "*" matches all; resourceNames restricts
# get, and list/watch whose fieldSelector requires metadata.name (RequestInfoFactory
# takes the name from it); non-resource URLs are "nonresource:<path>" here.

import os


def _docs(item):
    import yaml     # only when manifests are read: the simulator itself needs no YAML
    if isinstance(item, str) and os.path.exists(item):
        with open(item) as f:
            text = f.read()
    else:
        text = item
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def rbac_from_manifests(items):
    docs = []
    for it in (items if isinstance(items, (list, tuple)) else [items]):
        docs += _docs(it)
    roles = {}
    for d in docs:
        if d.get('kind') in ('ClusterRole', 'Role'):
            md = d.get('metadata', {})
            roles[(d['kind'], md.get('namespace'), md.get('name'))] = d.get('rules') or []
    table = []
    for d in docs:
        kind = d.get('kind')
        if kind not in ('ClusterRoleBinding', 'RoleBinding'):
            continue
        ns = d.get('metadata', {}).get('namespace') if kind == 'RoleBinding' else None
        ref = d.get('roleRef', {})
        rules = roles.get((ref.get('kind'), ns if ref.get('kind') == 'Role' else None, ref.get('name')), [])
        users, groups = [], []
        for s in d.get('subjects') or []:
            if s.get('kind') == 'User':
                users.append(s.get('name'))
            elif s.get('kind') == 'Group':
                groups.append(s.get('name'))
            elif s.get('kind') == 'ServiceAccount':
                users.append('system:serviceaccount:%s:%s' % (s.get('namespace') or ns, s.get('name')))
        for r in rules:
            if '' not in (r.get('apiGroups') or []) and '*' not in (r.get('apiGroups') or []):
                if not r.get('nonResourceURLs'):
                    continue
            entry = {'users': users, 'groups': groups, 'verbs': list(r.get('verbs') or [])}
            if r.get('nonResourceURLs'):
                entry['resources'] = ['nonresource:' + u for u in r['nonResourceURLs']]
            else:
                entry['resources'] = list(r.get('resources') or [])
            if r.get('resourceNames'):
                entry['resourceNames'] = list(r['resourceNames'])
            if ns:
                entry['namespaces'] = [ns]
            table.append(entry)
    return table


def authorize(table, user, groups, verb, resource, namespace, name=None):
    for r in table:
        if user not in r.get('users', []) and not set(groups) & set(r.get('groups', [])):
            continue
        if verb not in r.get('verbs', []) and '*' not in r.get('verbs', []):
            continue
        if resource not in r.get('resources', []) and '*' not in r.get('resources', []):
            continue
        if 'resourceNames' in r and (not name or name not in r['resourceNames']):
            continue
        if 'namespaces' in r and (not namespace or namespace not in r['namespaces']):
            continue
        return True
    return False
