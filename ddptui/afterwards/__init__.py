"""A run after its session: settling it when its session died, its diagnosis in
hindsight, a stop from beside a live session."""
