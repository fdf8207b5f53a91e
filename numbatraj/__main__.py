import sys

from numbatraj.cli import main

sys.exit(main())
