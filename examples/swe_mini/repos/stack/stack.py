"""A LIFO stack."""


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        """Remove and return the most recently pushed item."""
        return self.items.pop(0)

    def __len__(self):
        return len(self.items)
