"""Admission of answers: watching an answer stream past (`capture`) and judging what it
allows (`judgement`): whether a shared cache may keep it at all (`response_headers`),
who else receives it (`sharing`), and the operator's freshness written into its hint
(`freshness`)."""
