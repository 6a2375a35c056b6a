"""Code shared by the Python tests (importable as ``helpers``: pyproject.toml
puts tests/python on the path): checks of the contract, the NMS reference,
detection models and data. Fixtures are in tests/python/conftest.py."""
