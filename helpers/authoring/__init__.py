"""Tools for the course's authors, not for learners.

- ``student``  builds the student notebooks from the solution notebooks (``python -m helpers.authoring.student``)
- ``execute``  re-executes solution notebooks in place (``python -m helpers.authoring.execute``)
- ``website``  builds the course as a static website (``python3 course.py site``)
"""
