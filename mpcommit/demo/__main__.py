"""``python -m mpcommit.demo``: the main job, as ``mpcommit demo`` runs it."""

import sys

from .main_job import main

sys.exit(main())
