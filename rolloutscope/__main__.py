import sys

from rolloutscope.cli import main

sys.exit(main())
