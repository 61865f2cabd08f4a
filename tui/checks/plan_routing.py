def rows(ctx, inventory, *, topic):
    return None
