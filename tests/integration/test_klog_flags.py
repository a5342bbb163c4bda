#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_klog_flags.py — klog's logging flags, as a DaemonSet written for a Go device
# plugin passes them, on all three daemons of a running node.
#
# Asserts: each daemon started with a klog verbosity in one of its forms (-v 4, -v=4,
# --v=4) and -logtostderr / -alsologtostderr comes up (the node registers its
# resources: "-v" is not --version) and logs at debug on stderr, although the
# environment says KGPU_LOG_LEVEL=notice and KGPU_LOG_TARGET=journal (the flags win);
# the broker restarted with -v=1 -logtostderr=true logs its info lines and no debug
# line; the klog flags without effect in kgpu (-stderrthreshold, -log_dir, -vmodule,
# ...) are accepted with a notice; a bad klog value, "-v" without a value and
# abbreviations ("-vers", "--introspec") are errors naming the argument, exit 1, and
# never print the version.

import subprocess

import harness
from harness import check

PROBE_ARGS = ['-v', '4', '-logtostderr']
BROKER_ARGS = ['-v=4', '-logtostderr', '-stderrthreshold=INFO', '-log_dir', '/nonexistent',
               '-vmodule=foo=2', '-skip_headers']
GRPCD_ARGS = ['--v=4', '-alsologtostderr=true', '-logtostderr=false', '-one_output']


def debug_lines(log):
    return [l for l in log.splitlines() if '<debug>' in l]


def refused(node, daemon, args, words):
    p = subprocess.run([node.bin('daemons', daemon[len('kgpu-'):-1], daemon)] + args, capture_output=True,
                       text=True, timeout=10, env=node._env({'KGPU_LOG_TARGET': 'stderr'}))
    check(p.returncode == 1, '%s %r: rc %d, %r %r' % (daemon, args, p.returncode, p.stdout, p.stderr))
    check(p.stdout == '', '%s %r printed %r (the version?)' % (daemon, args, p.stdout))
    for w in words:
        check(w in p.stderr, '%s %r: %r not in %r' % (daemon, args, w, p.stderr))


def run(node):
    for name, args in (('probe', PROBE_ARGS), ('broker', BROKER_ARGS), ('grpc', GRPCD_ARGS)):
        log = node.daemons[name].log_text()
        check(' started' in log, '%s %r: no "started" line on stderr:\n%s' % (name, args, log))
        check(debug_lines(log), '%s %r: no debug line:\n%s' % (name, args, log))
    log = node.daemons['broker'].log_text()
    for flag in ('-stderrthreshold', '-log_dir', '-vmodule', '-skip_headers'):
        check('klog flag %s has no effect' % flag in log, 'no notice for %s:\n%s' % (flag, log))

    node.broker_args = ['-v=1', '-logtostderr=true']
    node.restart_broker()
    node.kubelet.wait_connected(list(harness.TWO_GPUS), timeout=10)
    log = node.daemons['broker'].log_text()
    since = log.rsplit('=== ', 1)[-1]  # this start only
    check('kgpu-brokerd' in since and ' started' in since, 'broker -v=1: no started line:\n%s' % since)
    check(not debug_lines(since), 'broker -v=1 logs at debug:\n%s' % since)

    for daemon in ('kgpu-probed', 'kgpu-brokerd', 'kgpu-grpcd'):
        refused(node, daemon, ['-v'], ['-v', 'needs a value'])
        refused(node, daemon, ['-v=loud'], ['-v=loud', 'verbosity'])
        refused(node, daemon, ['-vers'], ['-vers', 'unknown option'])
        refused(node, daemon, ['--introspec'], ['--introspec', 'unknown option'])
        refused(node, daemon, ['-stderrthreshold=LOUD'], ['INFO, WARNING, ERROR, FATAL'])
        refused(node, daemon, ['-logtostderr=maybe'], ['boolean'])


if __name__ == '__main__':
    harness.run_test(run, need_root=True, extra_env={'KGPU_LOG_LEVEL': 'notice', 'KGPU_LOG_TARGET': 'journal'},
                     probe_args=PROBE_ARGS, broker_args=BROKER_ARGS, grpcd_args=GRPCD_ARGS)
