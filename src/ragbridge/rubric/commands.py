def register(cli):
    pass
