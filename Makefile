# Thin wrappers around ./dev, which needs only python3 and bash.
.PHONY: setup demo test lint typecheck bench protos clean
setup demo test lint typecheck bench protos:
	./dev $@

clean:
	rm -rf .venv build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
