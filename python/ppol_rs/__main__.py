"""`python -m ppol_rs ...` runs the same command line as the `ppol` binary."""

import signal
import sys

from ppol_rs import _core


def main() -> None:
    """Entry point of the `ppol` console script installed with the wheel: the binary's command
    line, with its exit codes (0, 1, 2, 130) and its Ctrl-C."""
    # Python turns SIGINT into KeyboardInterrupt, which it can only raise once the command has
    # returned: a long command would ignore Ctrl-C. With the default disposition, Ctrl-C stops
    # it as it stops the binary (`evolve` and `resume` install their own handler: the first
    # Ctrl-C stops after the current evaluation, a second one exits 130).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(_core.cli(["ppol", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
