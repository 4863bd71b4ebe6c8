from verl_async_dapo.cli import main

raise SystemExit(main())
