import sys

from omni.cli import main

if __name__ == "__main__":  # the engine process (spawned) imports this module too
    sys.exit(main())
