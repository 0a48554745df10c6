import sys

from proctor.cli import main

sys.exit(main())
