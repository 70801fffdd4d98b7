"""The native adapters: thin Python over the C++ core (target, NextN head, block
drafter). The only modules that call into `ggspec._core`; they import nothing
above them."""
