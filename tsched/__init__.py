"""The composition root: the `tsched` command line, which puts the predictor, the simulator and the site
integrations together (a served `ForecastStart` runs the simulator's forward simulation, wired here)."""
