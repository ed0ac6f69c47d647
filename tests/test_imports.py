"""Every module of the project imports: code that only the e2e tests or the demo reach must not
break unnoticed when a module it uses changes."""

import importlib
import pkgutil

import pytest

import agent
import suggestion_server

MODULES = sorted(m.name for pkg in (agent, suggestion_server)
                 for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
                 if not m.name.endswith(".__main__"))  # those run on import


@pytest.mark.parametrize("module", MODULES)
def test_module_imports(module):
    importlib.import_module(module)
