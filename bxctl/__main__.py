"""`python -m bxctl` and the `bxctl` console script."""

from bxctl.app import main

if __name__ == "__main__":
    main()
