"""Build configuration that pyproject.toml cannot express: the built-in cohorts.

The repository keeps its cohorts at the top (`cohorts/*.jsonl` and the committed MATH source
`cohorts/source/`, the layout of the design card), but a wheel ships only packages. Mapping the
package name `breakthrough.builtin_cohorts` onto that folder makes setuptools copy the files into
every wheel and sdist as package data, where `breakthrough.tasks.cohorts` finds them with
`importlib.resources` after a normal (non-editable) install, from any working directory.
The report's Jinja2 templates are package data too, declared here beside them (setuptools would
let a [tool.setuptools.package-data] table in pyproject.toml replace this one).
Everything else (metadata, dependencies, scripts) lives in pyproject.toml.
"""

from setuptools import find_packages, setup

BUILTIN_COHORTS = "breakthrough.builtin_cohorts"
MATH_SOURCE = f"{BUILTIN_COHORTS}.source"  # cohorts/source: listed, or setuptools warns of it

setup(
    packages=[
        *find_packages(include=["breakthrough", "breakthrough.*"]),
        BUILTIN_COHORTS,
        MATH_SOURCE,
    ],
    package_dir={BUILTIN_COHORTS: "cohorts"},
    package_data={
        BUILTIN_COHORTS: ["*.jsonl", "README.md"],
        MATH_SOURCE: ["*.jsonl", "*.json", "README.md"],
        "breakthrough.report": ["templates/*.j2"],
    },  # bt report study's page
)
