import sys

from mfulab.run.cli import main

sys.exit(main())
