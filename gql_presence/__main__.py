import sys

from gql_presence.cli import main

sys.exit(main())
