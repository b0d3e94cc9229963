# SPDX-License-Identifier: BSD-3-Clause
"""python -m ucx_span env [--tls LIST]   export lines for a shell's eval
python -m ucx_span dir                  the directory of the plugin"""
import argparse
import shlex
import sys

import ucx_span


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m ucx_span",
        description="span, a UCX transport plugin: where it is and the "
                    "environment that makes UCX load it")
    sub = ap.add_subparsers(dest="command", required=True)
    p_env = sub.add_parser(
        "env", help="print export lines for eval \"$(python -m ucx_span env)\"")
    p_env.add_argument("--tls", help="also set UCX_TLS, e.g. cma+,tcp")
    sub.add_parser("dir", help="print the directory of libuct_span")
    args = ap.parse_args(argv)

    if args.command == "dir":
        print(ucx_span.module_dir())
    else:
        for name, value in ucx_span.env(tls=args.tls).items():
            print("export %s=%s" % (name, shlex.quote(value)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
