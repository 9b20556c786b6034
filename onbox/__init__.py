"""Files that run ON the rented box: stdlib only, python3 >= 3.8. Shipped byte for byte."""
