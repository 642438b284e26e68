// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Strings} from "@openzeppelin/contracts/utils/Strings.sol";

/// @title Batched reads, call-compatible with Multicall3's `aggregate3`
/// @notice The embedded devnet places this contract's runtime code at the canonical Multicall3
/// address, so clients that batch reads through `aggregate3` (viem's `multicall`) work unchanged.
/// It keeps no state and no immutables: its runtime code works wherever it is placed. It is not
/// payable, so it can never hold ether.
contract Multicall {
    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    /// @notice Calls each target in order; a failed call reverts the whole batch unless it allows failure.
    function aggregate3(Call3[] calldata calls) external returns (Result[] memory results) {
        results = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; ++i) {
            (bool success, bytes memory returnData) = calls[i].target.call(calls[i].callData);
            if (!success && !calls[i].allowFailure) {
                revert(string.concat("Multicall: call ", Strings.toString(i), " failed"));
            }
            results[i] = Result(success, returnData);
        }
    }
}
