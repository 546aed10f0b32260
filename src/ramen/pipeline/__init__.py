"""The functions the workflow's rules call that combine several stages (initialisation of the
foreign tables, bilingual training): above every stage, so no stage imports them."""
