import sys

from normbench.cli import main

sys.exit(main())
