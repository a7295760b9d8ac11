module github.com/leasehold/leasehold/clients/go

go 1.19
