"""The `hixlrun` command of a pip-installed hixl: runs the launcher binary
that ships inside the package (hixl/bin/hixlrun)."""

import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "hixlrun")
    if not os.access(exe, os.X_OK):
        sys.exit(f"hixlrun: the launcher is missing from this installation ({exe})")
    os.execv(exe, [exe, *sys.argv[1:]])


if __name__ == "__main__":
    main()
