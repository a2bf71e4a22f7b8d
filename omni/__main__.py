import sys

from omni.cli import main

sys.exit(main())
