"""`python -m ppol_rs ...` runs the same command line as the `ppol` binary."""

import sys

from ppol_rs import _core


def main() -> None:
    """Entry point of the `ppol` console script installed with the wheel."""
    sys.exit(_core.cli(["ppol", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
