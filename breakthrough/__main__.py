"""`python -m breakthrough ...`: the same command line as the `bt` console script."""

from breakthrough.cli import main

if __name__ == "__main__":
    main()
