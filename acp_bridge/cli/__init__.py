"""The command line. The only package that touches sys.argv, sys.stdin/stdout or os.environ."""
