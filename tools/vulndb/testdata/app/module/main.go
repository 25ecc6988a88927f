// Command module calls the vulnerable symbol of example.com/vulnerable.
package main

import "example.com/vulnerable"

func main() { println(vulnerable.Bad()) }
