"""`python -m escpod.live run|mock ...` (see escpod.live.run)."""
import sys

from .run import main

sys.exit(main())
