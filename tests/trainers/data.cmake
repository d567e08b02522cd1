# data tests (label trainers).
