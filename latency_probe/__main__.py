import sys

from latency_probe.probe import main

sys.exit(main())
