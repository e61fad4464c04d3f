# Shortcuts; the README's two commands (python3 course.py lab / test) need no make.
PY := .venv/bin/python
export OMP_NUM_THREADS := 1

.PHONY: lab test setups lint student execute bench

lab:            ## install (once) and open Jupyter Lab on your workspace/ (a git-ignored copy of notebooks/)
	python3 course.py lab

test:           ## install (once) and run the whole suite
	python3 course.py test

setups:         ## the solution notebooks under every CPU set-up (native, avx2, default)
	python3 course.py setups

lint:           ## fix what ruff can, format (notebooks included); review the diff before committing
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

student:        ## regenerate notebooks/NN_*.ipynb from notebooks/solutions/
	$(PY) -m helpers.authoring.student

execute:        ## re-execute solution notebooks in place (NB=notebooks/solutions/01_*.ipynb for one), then regenerate students
	$(PY) -m helpers.authoring.execute $(NB)
	$(PY) -m helpers.authoring.student

bench:          ## benchmarks (ratios measured in one run)
	$(PY) benchmarks/bench_mha.py
