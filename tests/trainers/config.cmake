# config tests (label trainers).
