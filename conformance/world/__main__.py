"""A rank process: started by World.start, never by hand."""

import sys

from conformance.world.rank import main

main(sys.argv[1:])
