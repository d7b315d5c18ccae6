import sys

from gpukernels.cli import main

if __name__ == "__main__":  # not in the processes multiprocessing spawns, which import this module again
    sys.exit(main())
