"""Words the model tests share, written once: a prompt every model can take, the model picker's "other" choice,
and what a link naming a model this server does not offer is told."""

GOOD = "Once upon a time"
OTHER = "Other: Hugging Face id or folder…"
NOT_OFFERED = "link parameter model ignored: that model is not offered by this server"
