import sys

from suggestion_server.cli import main

sys.exit(main())
