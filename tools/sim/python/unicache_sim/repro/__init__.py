"""The reproduction: the paper-versus-unicache table, ``unicache-sim figures``, and the plots."""
