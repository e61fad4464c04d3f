# Shortcuts; the README's two commands (python3 course.py lab / test) need no make.
PY := .venv/bin/python
export OMP_NUM_THREADS := 1

.PHONY: lab test student execute bench

lab:            ## install (once) and open Jupyter Lab on notebooks/
	python3 course.py lab

test:           ## install (once) and run the whole suite
	python3 course.py test

student:        ## regenerate notebooks/NN_*.ipynb from notebooks/solutions/
	$(PY) -m helpers.student

execute:        ## re-execute solution notebooks in place (NB=notebooks/solutions/01_*.ipynb for one), then regenerate students
	$(PY) -m helpers.execute $(NB)
	$(PY) -m helpers.student

bench:          ## benchmarks (ratios measured in one run)
	$(PY) benchmarks/bench_mha.py
