# ddp tests (label trainers).
