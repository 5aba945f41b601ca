"""`tsched evaluate`: the head-to-head harness (plan, execution, tables, report, plots).

`plan` is the leaf every other module reads (the tasks and what they produce);
`execution` runs the tasks and hands their outcomes to `report`, which builds
its tables with `tables`, explains their columns with `columns` and draws with
`plots`.
"""
