"""Reading what crosses the proxy exactly as an upstream will, or knowing that it cannot
be: request bodies (`body`), numbers (`numbers`), headers (`headers`), and a call's
arguments as a rule reads them (`arguments`)."""
