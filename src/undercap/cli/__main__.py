import sys

from undercap.cli import main

sys.exit(main())
