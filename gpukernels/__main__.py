import sys

from gpukernels.cli import main

sys.exit(main())
