"""A run after its controller: settling it when its controller died, its diagnosis in
hindsight, a stop from beside a live controller."""
