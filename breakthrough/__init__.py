"""breakthrough (`bt`): did the prefix hold value, or did the rest of the solution just fit the budget?"""

__version__ = "0.1.0"
