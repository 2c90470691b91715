"""The one exception the client raises for the server's refusals."""


class TroupeError(Exception):
    """An Error response: `code` is the ErrorCode name, `message` names the field at fault."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
