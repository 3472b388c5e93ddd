"""Each package lists its public API once (`tfblocks/_lazy.py`): `__all__` holds exactly
the names the table gives, each importable, and the names renamed in 0.1.0 still work for
one release with a `DeprecationWarning` that names the new one."""

import importlib

import pytest

from tests.test_api_docs import PUBLIC_SUBPACKAGES

PACKAGES = ("tfblocks", *PUBLIC_SUBPACKAGES)
RENAMED = (
    ("tfblocks.decoding", "SearchStrategy", "Search"),
    ("tfblocks.models", "PRESETS", "HPARAMS_SETS"),
    ("tfblocks.models", "SCHEDULES", "REGIMES"),
)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_listed_name_imports(name):
    package = importlib.import_module(name)
    assert package.__all__ == sorted(set(package.__all__)) and package.__all__
    for public in package.__all__:
        assert getattr(package, public) is not None, public
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize(("name", "old", "new"), RENAMED)
def test_a_renamed_name_warns_and_gives_the_new_one(name, old, new):
    package = importlib.import_module(name)
    assert old not in package.__all__ and new in package.__all__
    with pytest.warns(DeprecationWarning, match=rf"{name}\.{old} is deprecated.*{name}\.{new}"):
        assert getattr(package, old) is getattr(package, new)


def test_an_unknown_name_is_an_attribute_error():
    import tfblocks

    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        tfblocks.Nothing  # noqa: B018


def test_hparams_is_the_function_and_its_module_is_not_shadowed():
    import tfblocks
    from tfblocks.models import hparams, hyperparameters

    assert callable(hparams) and hparams is tfblocks.hparams is hyperparameters.hparams
