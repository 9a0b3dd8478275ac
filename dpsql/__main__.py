from dpsql.cli import main

raise SystemExit(main())
