"""`tsched evaluate`: the head-to-head harness (plan, execution, report, plots).

`plan` is the leaf every other module reads; `execution` runs the tasks and
hands their outcomes to `report`, which draws with `plots`.
"""
